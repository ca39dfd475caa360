"""StreamGraph (what the API builds) -> JobGraph (operators chained into tasks) -> the
distribution of subtasks and channels that the JobManager schedules."""
