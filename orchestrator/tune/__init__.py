"""`rcpforge tune`'s launcher, in a room of its own beside the campaign engine. What a
study is (the `tune:` section, the censored objective, the Optuna objects, the studies
and the hyperparameter table) is defined in `sweeps/tune_*.py`; this package only runs
it, through the orchestrator's backends and its one `execute_run`:

    launcher.py   the orchestrator's side: each cell's study driven ask-and-tell, its
                  trials submitted as backend jobs, the table written after each cell
    worker.py     what a backend runs for one trial: its seeds through `execute_run`,
                  the first reporting to the trial and its pruner

Import from the module that defines a name (`from rcpforge.orchestrator.tune.launcher import
tune_campaign`); this package re-exports nothing."""
