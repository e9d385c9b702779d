"""The service's endpoints, one router per concern: search, media, annotate."""
