"""@task functions for tests/test_tasks_backend.py (Django 6.0+; imported only there and by
autodiscovery in workers started with ``tests.taskapp.settings``)."""
