"""Helpers shared by ``stages`` and ``pipeline`` (both may import this
package; it imports neither): bucketed spill files for all-to-all exchanges
(:mod:`common.spill`)."""
