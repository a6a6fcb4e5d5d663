"""Judge evaluation: how well a judge configuration agrees with labelled verdicts (`rubricd judge eval`)."""
