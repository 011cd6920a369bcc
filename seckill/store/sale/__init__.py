"""The sale as the crowd meets it. ``state.py`` is the sale in this process (what the edge
asks, and the purchase); the rest, by concept:

- ``activity/``: an activity in Redis (its meta hash, creation, each process's copies,
  the rebuild from the database) and the operator's levers on it (pause, end, edit, restock);
- ``purchase/``: the stock decision (one script per purchase, a sharded activity's parts and
  borrowing between them) and the sold-out flags it leaves in this process;
- ``admission/``: who may try to buy: the queue, its proof-of-work challenge, the blocks;
- ``orders/``: what the purchase made: a buyer's order and its cancel, the payment window,
  an activity's numbers for the operator.
"""
