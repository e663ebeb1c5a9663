-- wrk script: POST the AdmissionReview in $REVIEW_FILE on every request (keep-alive).
local f = assert(io.open(os.getenv("REVIEW_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

-- Count answers that are not 200 so a run that only produced errors cannot look fast.
local bad = 0
function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
end
