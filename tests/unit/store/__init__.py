"""The artifact store (`day0.store`)."""
