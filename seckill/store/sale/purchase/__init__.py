"""The stock decision: one script per purchase (``stock``), a sharded activity's parts
(``part_counts``) and the borrowing between them (``borrowing``); and what a decision leaves in
this process: the sold-out flags, the activity's (``soldout``) and each variant's
(``variant_flags``)."""
