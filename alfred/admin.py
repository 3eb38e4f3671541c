from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from alfred.models import ApiToken
from alfred.tokens import token_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are created with `manage.py alfred_token create` (the secret is shown once
    there); here they are listed and revoked, never edited or brought back."""

    list_display = ["name", "role", "prefix", "created_at", "revoked_at"]
    list_filter = ["role", "revoked_at"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["id", "name", "role", "prefix", "digest", "created_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        names = list(queryset.filter(revoked_at__isnull=True).values_list("name", flat=True))
        for name in names:
            token_revoke(name=name)
        self.message_user(request, f"Revoked {len(names)} token(s).", messages.SUCCESS)
