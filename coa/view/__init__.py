"""coa.view: the trajectory viewer behind ``coa view``, one self-contained HTML page of episodes.

* :mod:`~coa.view.episodes`: episodes out of any artifact that holds them (collected and curated runs
  with their quarantine reasons, CoA SFT examples, RL rollouts, evaluations), in one shape;
* :mod:`~coa.view.page`: the page (inline CSS and script, data as JSON, paged, filtered, searched);
* :mod:`~coa.view.serve`: the page served on 127.0.0.1 for a bounded time.
"""
