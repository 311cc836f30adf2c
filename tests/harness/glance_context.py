"""glance's unauthenticated request context, with a project and a user: without keystone the
stock one has neither, and glance refuses to record the task of an interoperable import
without an owner."""

import glance.context
from glance.api.middleware import context

PROJECT = "e2e-project"
USER = "e2e-user"


class ProjectContextMiddleware(context.UnauthenticatedContextMiddleware):
    def process_request(self, req):
        req.context = glance.context.RequestContext(
            user_id=USER, project_id=PROJECT, roles=["admin"], is_admin=True
        )
