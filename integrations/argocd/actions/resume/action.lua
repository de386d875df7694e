-- Argo CD resource action "resume" for releaseplan.io/ReleasePlan: lift a pause request.
-- It makes the request `kubectl releaseplan resume` makes: the annotation
-- releaseplan.io/request = "resume/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "resume/argocd-" .. obj.metadata.resourceVersion
return obj
