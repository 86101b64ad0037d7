"""The test project's app: a model and the tasks the tests enqueue."""
