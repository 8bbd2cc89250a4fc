"""The Prefect flows (`flows`): deployments, the regression comparison."""
