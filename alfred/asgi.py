import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "alfred.settings")
# See ALFRED_DB_POOL_SIZE in settings: a request under ASGI runs on a fresh thread.
os.environ.setdefault("ALFRED_DB_POOL_SIZE", "10")
application = get_asgi_application()
