"""Messages between agents: sending (send and reply), delivery (waits, leases, delivery
callbacks), history (``get_message_history`` pages).

Contract: broker.md ("send_message", "reply_message", "wait_for_message", "get_message_history",
"Delivery"). Each part is its own object, built by the service; a message's path through the
database is ``gateway.broker.queries.messages`` and, for its three busiest statements,
``gateway.broker.prepared``. The tools show a message as ``gateway.broker.formats.message_json``
has it.
"""
