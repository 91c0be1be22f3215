"""The reasoning reward model (Agent-RRM, arXiv 2601.22154): a judge that reads a question, its
tools and a whole trajectory and writes ``<think>`` reasoning, a ``<critique>`` and a ``<score>``;
its score as a reward term (Reagent-R), its critique for a refinement pass (Reagent-C/U).
See docs/judge.md."""
