"""The public cold routes, one module per resource: the sale (``sale.py``), fair admission's
queue state and challenge (``admission.py``), and the payment provider's webhook
(``payments.py``). The hot ones, the purchase URL and the purchase, are ``seckill.web.hot``'s."""
