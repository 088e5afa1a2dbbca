"""The Prefect layer around the steps: one task runs any step (:mod:`tasks.run_step`), and each
stage publishes its small Prefect artifacts from the step's summary (:mod:`tasks.publish`);
an endpoint's ``api_key_block`` is read as a Prefect Secret block (:mod:`tasks.secret_blocks`,
installed on import)."""

from tasks import (
    secret_blocks as secret_blocks,  # installs the Secret-block reader into coa.llm.secrets
)
