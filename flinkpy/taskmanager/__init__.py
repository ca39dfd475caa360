"""The TaskManager: slots, and one supervised subprocess per task."""
