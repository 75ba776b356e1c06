"""Compaction (functions/compactor): fold old turns into the summary and the facts
(fold), and a fold the stream gave up on, tried again from CompactionFailureQueue (retry).
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.compaction.fold import Compactor
    from memagent.compaction.retry import FOLD, FailedCompactions, Job, job_of
    from memagent.compaction.settings import CompactorSettings

face(__name__)
