"""The operator's routes under ``/admin``, one module per resource: activities (with the
sale-day levers), orders, blocks, webhook endpoints, and the console. Which of them count
against ``SECKILL_ADMIN_RATE``: ``seckill.web.routes``."""
