"""The operator's reads of the store: the census (metrics, console) and reconcile."""
