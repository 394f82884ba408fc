"""mindcorpus: raw text sources -> immutable, versioned MindRecord corpora for MindSpore.

The orchestration lives here (config, readers, executors, build, manifest);
the training-side modules (`pipeline.loader`, `pipeline.lineage`,
`pipeline.order`) import nothing from `stages/`.
"""

__version__ = "0.1.0"
