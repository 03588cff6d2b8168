"""Pure decision logic: manifests, registry, context analysis, scoring, ranking, learner math."""
