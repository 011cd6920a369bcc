"""The sale as the crowd meets it: the purchase decision, sold-out flags, each process's
activity copies, the queue, payments, and recovery from the database."""
