"""High availability: JobManager leader election and recovery data in Apache ZooKeeper."""
