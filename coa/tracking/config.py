"""The ``tracking:`` section of the pipeline config: which experiment tracker a run reports to."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from coa.config import StrictModel

Backend = Literal["none", "mlflow", "tensorboard", "wandb", "trackio"]


class TrackingConfig(StrictModel):
    """Experiment tracking. ``none`` (the default) reports nothing and writes nothing anywhere."""

    backend: Backend = Field(
        default="none",
        description=(
            "The tracker: none (offline, nothing written), mlflow (runs, metrics and the model registry "
            "mirror), tensorboard (event files under log_dir), wandb (offline runs under log_dir), trackio "
            "(a local store under log_dir); all through the trainers' report_to."
        ),
    )
    uri: str | None = Field(
        default=None,
        description="MLflow tracking URI (http://host:5000, sqlite:///mlflow.db); None: MLFLOW_TRACKING_URI.",
    )
    experiment: str = Field(
        default="coa",
        description="MLflow experiment, W&B / Trackio project that every run of this pipeline goes into.",
    )
    log_dir: str | None = Field(
        default=None,
        description=(
            "TensorBoard, W&B offline and Trackio folder; None: <storage root>/tracking/<backend> when the "
            "storage root is a local folder (set it when the store is on S3)."
        ),
    )
    wandb_mode: Literal["online", "offline"] = Field(
        default="offline",
        description="W&B mode: offline writes runs to log_dir with no network (`wandb sync` uploads them).",
    )
    registry_mirror: bool = Field(
        default=True,
        description=(
            "With backend mlflow: mirror promotions and rollbacks into the MLflow model registry "
            "(best effort; our registry stays the source of truth)."
        ),
    )
