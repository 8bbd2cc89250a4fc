"""The release webhook (`day0.webhook`, `day0 webhook serve`)."""
