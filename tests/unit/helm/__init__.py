"""The Helm chart (helm/day0): its values schema, rendered offline."""
