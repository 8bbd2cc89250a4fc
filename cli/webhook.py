"""`day0 webhook serve`: the Hugging Face release webhook receiver on uvicorn.

    DAY0_WEBHOOK_SECRET=... day0 webhook serve                       # 127.0.0.1:8765, configs/webhook/watch.yaml
    day0 webhook serve --host 0.0.0.0 --port 8080 --watch my-watch.yaml --store s3://bucket/day0

Every other setting comes from DAY0_WEBHOOK_* (see day0.webhook.settings); runs are triggered on the
Prefect server at PREFECT_API_URL, which must be set: the receiver never starts a Prefect server of its
own. Exit 2, naming the setting, when the secret is missing or shorter than 16 bytes, PREFECT_API_URL
is unset or not an http(s) URL, or the watch config or its spec template is missing or invalid.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from day0.errors import UsageError

__all__ = ["add_webhook_command", "cmd_webhook_serve"]


def add_webhook_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("webhook", help="the Hugging Face release webhook receiver")
    sub = p.add_subparsers(dest="webhook_command", required=True)
    s = sub.add_parser("serve", help="serve the receiver (FastAPI on uvicorn)")
    s.add_argument("--host", help="bind address (default DAY0_WEBHOOK_HOST or 127.0.0.1)")
    s.add_argument("--port", type=int, help="port (default DAY0_WEBHOOK_PORT or 8765)")
    s.add_argument("--watch", type=Path, help="watch config YAML (default configs/webhook/watch.yaml)")
    s.add_argument("--store", help="artifact store URI for the dedupe records (default file://.day0)")
    s.set_defaults(func=cmd_webhook_serve)


def cmd_webhook_serve(args: argparse.Namespace) -> int:
    import logging  # here, not at the top: every `day0` command builds this parser

    import uvicorn

    from day0.settings import http_url
    from day0.webhook import WebhookSettings, create_app, prefect_api_url

    # Any: argparse values (str, int, Path), checked by WebhookSettings itself
    overrides: dict[str, Any] = {k: v for k in ("host", "port", "watch", "store") if (v := getattr(args, k))}
    try:
        settings = WebhookSettings(**overrides)
    except ValidationError as exc:
        fields = ", ".join(f"DAY0_WEBHOOK_{'.'.join(map(str, e['loc'])).upper()}: {e['msg']}" for e in exc.errors())
        raise UsageError(f"webhook settings: {fields}") from None
    try:
        api_url = prefect_api_url()
    except ValidationError as exc:  # Prefect's own settings refuse it (an unparsable URL)
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(
            f"Prefect's settings: {problems} (check PREFECT_API_URL, e.g. http://prefect:4200/api)"
        ) from None
    if api_url is None:
        raise UsageError(
            "PREFECT_API_URL is not set: the receiver triggers runs on an existing Prefect server "
            "(e.g. PREFECT_API_URL=http://prefect:4200/api) and never starts one of its own"
        )
    try:
        http_url(api_url)
    except ValueError as exc:
        raise UsageError(f"PREFECT_API_URL: {exc} (e.g. http://prefect:4200/api)") from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per Prefect API call otherwise
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    return 0
