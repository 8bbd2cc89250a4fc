"""The backends (`day0.backends`): the session, the local and KubeRay backends, the pod runner's parts."""
