"""What leaves Alfred about an execution once the engine has recorded it: the event streams
(Server-Sent Events), the signed webhooks (endpoints, the relay) and the notifications that
come in (GitHub, ArgoCD). The engine owes a webhook delivery in the event's own transaction
(``executions.outbox``); what sends it is here."""
