"""Compaction (functions/compactor): fold old turns into the summary and the facts
(fold), and a fold the stream gave up on, tried again from CompactionFailureQueue (retry).

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__,
    {
        "fold": ["Compactor"],
        "retry": ["FOLD", "FailedCompactions", "Job", "job_of"],
        "settings": ["CompactorSettings"],
    },
)
