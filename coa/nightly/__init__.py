"""The nightly stages: ``nightly.new_tasks`` (tasks no earlier night collected) and ``nightly.merge``
(tonight's runs and tasks with the earlier nights'); the plan that uses them is :mod:`coa.plan.nightly`."""
