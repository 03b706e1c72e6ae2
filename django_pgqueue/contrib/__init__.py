"""Optional apps that ship with django_pgqueue. Each is its own Django app, added to
``INSTALLED_APPS`` by who wants it; nothing in the runtime (``import django_pgqueue``, the
worker, the admin, the other commands) imports them.

* ``django_pgqueue.contrib.bench``: the ``pgqueue_bench`` and ``pgqueue_chaos`` commands.
"""
