"""Compaction (functions/compactor): fold old turns into the summary and the facts
(fold), and a fold the stream gave up on, tried again from CompactionFailureQueue (retry).

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face: typed for mypy and editors, each loaded on first use
    from memagent.compaction.fold import Compactor
    from memagent.compaction.retry import FOLD, FailedCompactions, Job, job_of
    from memagent.compaction.settings import CompactorSettings

face(__name__)
