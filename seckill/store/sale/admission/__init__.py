"""Who may try to buy: the admission queue of ``queue`` and ``draw`` activities (``queue``),
the proof-of-work challenge for joining it (``challenge``), and this process's copy of the
operator's blocks (``blocks``)."""
