"""API authentication: trade a username and password for the API token."""
from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.accounts.services import api_token_ensure
from webapp.api.schema import error
from webapp.api.serializers import RequestSerializer


class TokenRequestSerializer(RequestSerializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)

    def validate(self, attrs):
        user = authenticate(self.context.get("request"), username=attrs["username"], password=attrs["password"])
        if user is None or not user.is_active:
            raise serializers.ValidationError("The username or password is incorrect.")
        attrs["user"] = user
        return attrs


class TokenResponseSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send it as 'Authorization: Token <key>'.")


class ObtainTokenApi(APIView):
    """Returns the API token of the user whose username and password are posted."""

    authentication_classes: list = []  # credentials are in the body; no session, so no CSRF check
    permission_classes = [AllowAny]

    @extend_schema(request=TokenRequestSerializer, responses={
        200: TokenResponseSerializer,
        429: error('{"error": "Too many failed sign-ins for this account or from this address. Try again in 5 '
                   'minutes; ..."}: sign-ins are throttled (webapp.accounts.throttle); Retry-After says when.')},
        tags=["auth"])
    def post(self, request: Request) -> Response:
        serializer = TokenRequestSerializer(data=request.data, context={"request": request._request})
        serializer.is_valid(raise_exception=True)
        token = api_token_ensure(user=serializer.validated_data["user"])
        return Response({"token": token.key})
