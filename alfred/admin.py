from django.contrib import admin

from alfred.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["name", "role", "prefix", "created_at", "revoked_at"]
    list_filter = ["role", "revoked_at"]
    search_fields = ["name", "prefix"]
    # Tokens are created with `manage.py alfred_token create` (the secret is shown once there).
    readonly_fields = ["id", "name", "role", "prefix", "digest", "created_at"]

    def has_add_permission(self, request) -> bool:
        return False
