"""The delivery's HTTP views: the event streams, the webhook endpoints and their deliveries,
the inbound receivers. Routed by ``delivery.urls``."""
