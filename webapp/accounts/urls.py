from django.contrib.auth import views as auth_views
from django.urls import path

from webapp.accounts import views

urlpatterns = [
    path("", views.home, name="home"),
    path("signup/", views.signup, name="signup"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="accounts/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),  # POST only
    path("account/", views.account, name="account"),
    path("account/token/", views.account_token_regenerate, name="account-token-regenerate"),
]
