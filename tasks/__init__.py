"""The Prefect layer around the steps: one task runs any step (:mod:`tasks.steps`), and each stage
publishes its small Prefect artifacts from the step's summary (:mod:`tasks.publish`)."""
