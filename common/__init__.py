"""Helpers shared by ``stages`` and ``pipeline`` (both may import this
package; it imports neither): atomic writes and file digests
(:mod:`common.io`), seeded hashing of document ids (:mod:`common.hashing`),
argument checks (:mod:`common.checks`), errors that name their file
(:mod:`common.errors`) and bucketed spill files for all-to-all exchanges
(:mod:`common.spill`)."""
