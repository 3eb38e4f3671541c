from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from alfred import views
from alfred.login import AdminLoginForm
from alfred.parsers import FormatQueryNegotiation

admin.site.login_form = AdminLoginForm  # bounds failed logins (alfred/login.py)
admin.site.site_header = "Alfred"
admin.site.site_title = "Alfred"
admin.site.index_title = "Operations"
admin.site.site_url = None  # no site beside the admin: the user links name the API docs instead
# The lists are wide (ids, lane keys, URLs): at 1280 px the app sidebar would leave them less
# than half the window. The index and the breadcrumbs lead everywhere it does.
admin.site.enable_nav_sidebar = False

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("api/v1/", include("executions.api.urls")),
    path("api/v1/", include("delivery.urls")),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(content_negotiation_class=FormatQueryNegotiation),
        name="schema",
    ),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler400 = "alfred.views.bad_request"
handler403 = "alfred.views.permission_denied"
handler404 = "alfred.views.not_found"
handler500 = "alfred.views.server_error"
