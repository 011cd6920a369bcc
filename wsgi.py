"""What gunicorn loads: ``gunicorn -c gunicorn.conf.py wsgi:app``."""

from __future__ import annotations

from seckill.web.app import create_app

app = create_app()
