"""The Hugging Face release webhook receiver (see `day0.webhook.app` for the HTTP contract).

Modules: `payload` (our hub payload model and the start/ignore decision), `settings` (DAY0_WEBHOOK_*
and the watch config), `dedupe` (create-if-absent claims and the durable queue in the artifact store),
`dispatch` (store calls off the event loop; the dispatcher that turns queued releases into flow runs),
`trigger` (the Prefect client), `safe` (escaping input for logs and answers), `metrics` (Prometheus),
`app` (the FastAPI app). Imports Prefect only to trigger a deployment.
"""

from day0.webhook.app import create_app
from day0.webhook.dispatch import Trigger
from day0.webhook.payload import Decision, HubPayload, WatchList, decide
from day0.webhook.settings import WatchConfig, WebhookSettings, load_watch
from day0.webhook.trigger import PrefectTrigger, prefect_api_url

__all__ = [
    "Decision",
    "HubPayload",
    "PrefectTrigger",
    "Trigger",
    "WatchConfig",
    "WatchList",
    "WebhookSettings",
    "create_app",
    "decide",
    "load_watch",
    "prefect_api_url",
]
