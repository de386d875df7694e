-- Argo CD resource action "retry" for releaseplan.io/ReleasePlan: roll the desired revision out again after a rollback or a halt.
-- It makes the request `kubectl releaseplan retry` makes: the annotation
-- releaseplan.io/request = "retry/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "retry/argocd-" .. obj.metadata.resourceVersion
return obj
