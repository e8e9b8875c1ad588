"""What each FP4 countermeasure catches and costs (issue 32, `rcpforge policy`): seeded,
vectorised Monte Carlo of honest and cherry-picking submitters under today's RCP rule and
the working group's four proposals.

- `distributions`: the run distributions (an RCP's runs or a campaign's), the eval grid;
- `thresholds`: today's rule (the checker's pruned pass) as numbers, fixed or redrawn;
- `submitters`: honest and cherry-picked submissions (best of k sets, N best of k x N runs);
- `policies`: the five policies' verdicts and scores;
- `simulate`: the rows (one per batch size, policy, factor, pick, pick mode);
- `output`: the console table, the brief and the HTML report."""
