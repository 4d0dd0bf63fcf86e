"""What a run leaves behind: the regression corpus (`corpus`), replay and diagnosis of one entry
(`replay`), minimisation of a failing recipe (`minimise`), the run report (`report`) and the
strategy-feature coverage of a campaign (`coverage`)."""
