"""The toy-to-LM ladder (issue 33; docs/bridge.md): instances that add one LM ingredient at a time
(:mod:`~simulate.bridge.rungs`, :mod:`~simulate.bridge.ladder`), the runner (:mod:`~simulate.bridge.run`), the
mechanism diagnostic (:mod:`~simulate.bridge.diagnostics`), the summary tables (:mod:`~simulate.bridge.summary`)
and the transformer rung, the LM harness's own model on a task with exact J (:mod:`~simulate.bridge.transformer`)."""
