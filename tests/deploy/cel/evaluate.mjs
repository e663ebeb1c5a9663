// Evaluates a ValidatingAdmissionPolicy's CEL the way the API server does for one request:
// `object` is the pod, each of spec.variables is computed in order into `variables`, then every
// validation's expression must be true; messageExpression (or message) says why not.
// stdin: {"spec": <policy spec>, "objects": [<pod>, ...]}; stdout: [{"allowed", "messages"}, ...]
import { evaluate } from '@marcbachmann/cel-js'

const input = JSON.parse(await new Promise((resolve) => {
  let text = ''
  process.stdin.on('data', (chunk) => { text += chunk })
  process.stdin.on('end', () => resolve(text))
}))

const results = input.objects.map((object) => {
  const variables = {}
  for (const v of input.spec.variables ?? []) {
    variables[v.name] = evaluate(v.expression, { object, variables })
  }
  const messages = []
  for (const rule of input.spec.validations) {
    if (evaluate(rule.expression, { object, variables }) !== true) {
      messages.push(rule.messageExpression
        ? evaluate(rule.messageExpression, { object, variables })
        : rule.message)
    }
  }
  return { allowed: messages.length === 0, messages }
})
process.stdout.write(JSON.stringify(results))
