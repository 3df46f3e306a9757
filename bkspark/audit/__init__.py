"""The orphan-ledger audit (BP-44): which ledgers outlived their context, and the auditor that finds them.

See docs/context-and-audit.md.
"""

from bkspark.audit.auditor import Auditor
from bkspark.audit.records import (
    AuditConfig,
    AuditStatus,
    LeadershipLostError,
    OrphanReason,
    OrphanRecord,
    list_orphans,
    read_config,
    read_status,
    write_config,
)
from bkspark.audit.scan import AuditResult, orphan_reasons, reconcile, scan

__all__ = [
    "Auditor",
    "AuditConfig",
    "AuditResult",
    "AuditStatus",
    "LeadershipLostError",
    "OrphanReason",
    "OrphanRecord",
    "list_orphans",
    "orphan_reasons",
    "read_config",
    "read_status",
    "reconcile",
    "scan",
    "write_config",
]
