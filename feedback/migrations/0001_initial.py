import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('chat', '0012_pins_custom_instructions'),
        ('tenants', '0006_prompt_suggestions'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Feedback',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('rating', models.CharField(choices=[('up', 'Good reply'), ('down', 'Bad reply')], max_length=8)),
                ('reason', models.CharField(blank=True, choices=[('', '—'), ('wrong', 'Wrong'), ('outdated', 'Outdated'), ('not_helpful', 'Not helpful'), ('other', 'Other')], default='', max_length=16)),
                ('comment', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ('updated_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('api_key', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tenants.apikey', verbose_name='API key')),
                ('message', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='chat.message', verbose_name='reply')),
                ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='feedback', to='tenants.tenant')),
                ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'feedback',
                'ordering': ['-updated_at'],
                'indexes': [models.Index(fields=['tenant', '-updated_at'], name='feedback_tenant_recent')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('user__isnull', False)), fields=('message', 'user'), name='feedback_one_per_person'), models.UniqueConstraint(condition=models.Q(('user__isnull', True)), fields=('message',), name='feedback_one_per_completion')],
            },
        ),
    ]
