"""The Prefect layer around the steps: one task runs any step (:mod:`tasks.steps`), and each stage
publishes its small Prefect artifacts from the step's summary (:mod:`tasks.publish`); an endpoint's
``api_key_block`` is read as a Prefect Secret block (:mod:`tasks.secrets`, installed on import)."""

from tasks import secrets as secrets  # installs the Secret-block reader into coa.llm.secrets
