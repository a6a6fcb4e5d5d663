"""The rubric set in force for a prompt (used by the scorer, the comparer and the arm service), and rubric rules.

`sets` finds it (stored, seeded from configuration, or generated) and caches it per run and instance;
`generation` writes a new instance's own rubrics with the `generator` agent (Rubric-ARM): its chat in `prompting`,
its draft in `draft`, its `settings`. `validation` checks one proposed rubric, for the generator and the updater.
"""
