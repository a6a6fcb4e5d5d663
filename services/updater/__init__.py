"""The updater service: retrieves static and dynamic memory and evolves the run's adaptive rubrics into a new version.

Skeleton for now; the memory loop brings its work.
"""
