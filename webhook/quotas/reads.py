"""The quota wing's part of the read side's seam (webhook/read_seams.py `QuotaReads`): why a pod waits for
quota, the tenants' waiting pods, `kgwe review`'s quota answer. Registered by webhook/assembly.py."""

from __future__ import annotations

from webhook.quotas.admission import queue_answer as queue_answer
from webhook.quotas.view import waiting_rows as waiting_rows
from webhook.quotas.view import why_waiting as why_waiting
