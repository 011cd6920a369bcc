"""What a purchase made, on Redis: a buyer's order, its status and the operator's cancel
(``orders``), the payment window (``payments``), and an activity's numbers for the operator
(``stats``)."""
