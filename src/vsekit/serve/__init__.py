"""HTTP service and web page over a collection index (``vse serve``)."""
